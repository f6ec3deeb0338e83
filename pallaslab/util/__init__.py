"""Leaf utilities every layer may use (they import nothing else of pallaslab).

- `text`: showing untrusted text (names, paths, IR) safely in terminals and HTML;
- `tempdir`: the one temporary directory per process, removed at exit;
- `private_dir`: a private directory (0700) read and written without ever following a
  symbolic link, with atomic writes (the lowering cache).
"""
