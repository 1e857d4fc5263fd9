"""A scenario's narration (its docstring) as HTML.

Docstrings are plain text with `backticks` for code and paragraphs that start with "Question:"
and "Answer:". That is all the markup they use, so a dozen lines do instead of a Markdown
dependency. Everything is escaped first; only the markup made here is trusted.
"""

from __future__ import annotations

import re

from markupsafe import Markup, escape

__all__ = ["narration_html", "inline_html"]

_CODE = re.compile(r"`([^`]+)`")
_LABEL = re.compile(r"^(Question|Answer|What to look at|Try):\s*", re.IGNORECASE)


def _inline(text: str) -> str:
    return _CODE.sub(lambda m: f"<code>{m.group(1)}</code>", str(escape(text)))


def inline_html(text: str) -> Markup:
    """One line of docstring text (a title or a question) with its `code` marked."""
    return Markup(_inline(text))


def narration_html(text: str) -> Markup:
    """Paragraphs as <p>; the answer inside a <details> so a teacher can ask first."""
    parts: list[str] = []
    for para in re.split(r"\n\s*\n", text.strip()):
        words = " ".join(para.split())
        if not words:
            continue
        label = _LABEL.match(words)
        if label is None:
            parts.append(f"<p>{_inline(words)}</p>")
            continue
        name = label.group(1).capitalize()
        body = _inline(words[label.end():])
        if name == "Answer":
            parts.append('<details class="answer"><summary>Show the answer</summary>'
                         f"<p>{body}</p></details>")
        else:
            kind = name.lower().replace(" ", "-")
            parts.append(f'<p class="para-{kind}"><strong>{escape(name)}:</strong> {body}</p>')
    return Markup("\n".join(parts))
