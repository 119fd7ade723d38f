"""The IPython layer, thin over the core: a `session.Session` per shell (what
``%load_ext gpucache_ext`` starts), the magics (`magic`), running a cell
(`cell`) and showing its errors as a plain cell's (`cell_errors`), and the
per-cell report (`report`).  The core (`gpucache_ext.pipeline.cache`,
`gpucache_ext.queries`, ...) imports none of it."""
