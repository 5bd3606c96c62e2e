"""The server for the built site (`make serve`): it takes its port from the system and says which."""
import re
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from pu1_docs.serve_site import site_server


def test_the_server_picks_a_free_port_says_which_and_answers_a_missing_page_with_the_sites_404(tmp_path):
    (tmp_path / "index.html").write_text("<h1>home</h1>")
    (tmp_path / "404.html").write_text("<h1>the site's own 404</h1>")
    server = subprocess.Popen([sys.executable, "-m", "pu1_docs.serve_site", str(tmp_path), "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        first_line = server.stdout.readline()
        address = re.match(r"serving the site on (http://127\.0\.0\.1:(\d+)/)", first_line)
        assert address and int(address[2]) != 0, first_line
        with urllib.request.urlopen(address[1], timeout=30) as home:
            assert home.read() == b"<h1>home</h1>"
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(address[1] + "no/such/page/", timeout=30)
        assert missing.value.code == 404 and missing.value.read() == b"<h1>the site's own 404</h1>"
    finally:
        server.kill()
        server.wait()


def test_serving_a_folder_without_a_site_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="holds no built site.*make docs"):
        site_server(tmp_path, 0)
