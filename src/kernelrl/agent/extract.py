"""Pull the candidate's Python source out of a model answer (chatty, fenced or not)."""

from __future__ import annotations

import ast
import re
import textwrap

# An opening fence (``` or ~~~, 3+), an optional info string, the body, the same fence closing it.
FENCE = re.compile(
    r"^[ ]{0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)\n(?P<body>.*?)^[ ]{0,3}(?P=fence)[ \t]*$", re.M | re.S
)
PYTHON_TAGS = {"python", "py", "python3", "py3", "pytorch", ""}
THINK = re.compile(r"<think>.*?</think>", re.S | re.I)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every closed fenced block, in order."""
    return [(m.group("info").strip().split()[0].lower() if m.group("info").strip() else "",
             textwrap.dedent(m.group("body"))) for m in FENCE.finditer(text)]


def _unclosed_block(text: str) -> str | None:
    """The body after the last opening fence when the answer was cut off before closing it."""
    matches = list(re.finditer(r"^[ ]{0,3}(`{3,}|~{3,})[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n", text, re.M))
    if not matches:
        return None
    last = matches[-1]
    return text[last.end():] if last.group(2).lower() in PYTHON_TAGS else None


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True


def _bare_code(text: str) -> str | None:
    """Without fences: the span from the first import/class line to the end, if it parses."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if re.match(r"^(import |from \S+ import |class |def |@)", ln)), None)
    if start is None:
        return None
    for end in range(len(lines), start, -1):  # drop trailing prose until it parses
        code = "\n".join(lines[start:end]).strip()
        if code and _parses(code):
            return code + "\n"
    return None


def extract_code(text: str) -> str | None:
    """The candidate source in `text`, or None.

    Preference: the last closed Python-tagged (or untagged) fenced block that defines `ModelNew`;
    then the last Python/untagged block; then an unclosed final block (a truncated answer); then
    bare code from the first `import`/`class` line. Reasoning in `<think>` tags is ignored.
    """
    text = THINK.sub("", text.replace("\r\n", "\n"))
    blocks = [body for tag, body in fenced_blocks(text) if tag in PYTHON_TAGS]
    with_model = [b for b in blocks if re.search(r"class\s+ModelNew\b", b)]
    if with_model:
        return with_model[-1].strip("\n") + "\n"
    if blocks:
        return blocks[-1].strip("\n") + "\n"
    unclosed = _unclosed_block(text)
    if unclosed and unclosed.strip():
        return unclosed.strip("\n") + "\n"
    if not fenced_blocks(text):
        return _bare_code(text)
    return None
