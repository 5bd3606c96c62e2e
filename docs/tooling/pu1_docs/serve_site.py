"""Serve the built site on 127.0.0.1 as a static host would: text files gzip-compressed for a browser that accepts it,
and a missing page gets the site's own 404 page.

`python -m pu1_docs.serve_site SITE --port PORT` (`make serve`); port 0 takes a free port from the system. The first
line printed gives the site's address, with the port actually served."""
from __future__ import annotations

import argparse
import functools
import gzip
import http.server
import os
from pathlib import Path

# What static hosts compress: text. Images and fonts are compressed already.
COMPRESSED_TYPES = ("text/", "application/javascript", "application/json", "image/svg+xml")


@functools.lru_cache(maxsize=256)
def _gzipped(path: str, modified_ns: int) -> bytes:
    return gzip.compress(Path(path).read_bytes(), compresslevel=6, mtime=0)


class SiteHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the site's files, text gzip-compressed when the browser accepts it; a missing page is answered with the
    site's 404 page."""

    def do_GET(self) -> None:
        if not self._send_compressed():
            super().do_GET()

    def do_HEAD(self) -> None:
        if not self._send_compressed():
            super().do_HEAD()

    def _send_compressed(self) -> bool:
        """Answer with the gzip-compressed file when the request names a text file and accepts gzip."""
        if "gzip" not in self.headers.get("Accept-Encoding", ""):
            return False
        path = self.translate_path(self.path)
        if os.path.isdir(path):
            if not self.path.split("?", 1)[0].endswith("/"):
                return False  # the directory's redirect to its address with a slash
            path = os.path.join(path, "index.html")
        content_type = self.guess_type(path)
        if not os.path.isfile(path) or not content_type.startswith(COMPRESSED_TYPES):
            return False
        body = _gzipped(path, os.stat(path).st_mtime_ns)
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Vary", "Accept-Encoding")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        page = Path(self.directory) / "404.html"
        if code != 404 or not page.is_file():
            return super().send_error(code, message, explain)
        body = page.read_bytes()
        self.send_response(404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:
        if self.server.verbose:
            super().log_message(format, *args)


def site_server(site: Path, port: int, verbose: bool = False) -> http.server.ThreadingHTTPServer:
    """A server for the site folder on 127.0.0.1:port (port 0 picks a free one)."""
    if not (site / "index.html").is_file():
        raise SystemExit(f"{site} holds no built site (no index.html): build it first with `make docs`")
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(SiteHandler, directory=str(site)))
    except OSError as error:
        raise SystemExit(f"cannot serve on 127.0.0.1:{port} ({error.strerror}): choose another port, e.g. make docs PORT=8001")
    server.verbose = verbose
    return server


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("site", type=Path, nargs="?", default=Path("site"))
    parser.add_argument("--port", type=int, default=8000)
    arguments = parser.parse_args()
    server = site_server(arguments.site, arguments.port, verbose=True)
    print(f"serving the site on http://127.0.0.1:{server.server_address[1]}/ (Ctrl+C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
