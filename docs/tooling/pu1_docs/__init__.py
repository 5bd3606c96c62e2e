"""The docs build's tooling, apart from the product: forked notebook kernels (`forked_kernel`), the cache of executed
notebooks (`notebook_cache`) and the server for the built site (`serve_site`). The mkdocs hook in docs/hooks uses
them."""
