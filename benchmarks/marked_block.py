"""Write a benchmark's results into a markdown file between its own markers, atomically (temp file, then rename)."""

from __future__ import annotations

import os
import re


def write_block(path: str, name: str, block: str, writer: str) -> None:
    """Replace the text between `<!-- NAME:begin (written by WRITER) -->` and `<!-- NAME:end -->` in `path` with
    `block`; append the marked block when the file has no such markers, create the file when it does not exist."""
    begin, end = f"<!-- {name}:begin (written by {writer}) -->", f"<!-- {name}:end -->"
    new = f"{begin}\n{block}\n{end}"
    text = f"{new}\n"
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
        if begin in text and end in text:
            text = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: new, text, flags=re.S)
        else:
            text = text.rstrip("\n") + "\n\n" + new + "\n"
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
