"""Free-form Fortran line wrapping: :func:`wrap` splits any generated line into lines of at most
132 characters (directive sentinels continued, trailing comments moved, character literals and
names never split)."""

import re

#: Fact of Fortran: the longest free-form source line the standard allows.
MAX_LINE = 132


#: Sentinels of directive lines (OpenMP, OpenACC, OpenMP conditional compilation), which continue
#: with their sentinel; any other line whose first non-blank character is ``!`` is a comment.
_SENTINEL = re.compile(r"!\$(omp|acc)?(?=[ &]|$)", re.I)


def _comment_start(code):
    """Index of the ``!`` that starts ``code``'s trailing comment (``len(code)`` if none): the
    first ``!`` outside a character literal. A doubled quote inside a literal toggles twice."""
    quote = None
    for i, ch in enumerate(code):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "!":
            return i
    return len(code)


def _literal_mask(code):
    """Per character of ``code`` (no comment): True inside a character literal."""
    mask, quote = [], None
    for ch in code:
        if quote:
            mask.append(True)
            if ch == quote:
                quote = None
        else:
            quote = ch if ch in "'\"" else None
            mask.append(quote is not None)
    return mask


def _wrap_comment(prefix, text):
    """A comment as lines of at most MAX_LINE characters, each starting with ``prefix``; words
    longer than a line are split."""
    width = MAX_LINE - len(prefix)
    out, current = [], ""
    for word in text.split():
        while len(word) > width:
            if current:
                out.append(current)
                current = ""
            out.append(word[:width])
            word = word[width:]
        if current and len(current) + 1 + len(word) > width:
            out.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    out.append(current)
    return [(prefix + part).rstrip() for part in out]


def wrap(line):
    """Split a free-form line into lines of at most 132 characters.

    A comment line is word-wrapped into comment lines with the same marker (``!`` or ``!>``). A
    code line's trailing comment (the first ``!`` outside a character literal) moves to comment
    lines of its own above the code. Code is cut at a blank outside character literals and
    continued with ``&`` at the end of the line and ``    & `` on the next; where there is no such
    blank (a long literal or token) it is cut anywhere and the next line starts with ``&``, which
    continues the literal or token with its very next character (Fortran 2008, 3.3.2.4). A
    directive (``!$omp``, ``!$acc``, ``!$``) continues with its sentinel.
    """
    if len(line) <= MAX_LINE:
        return [line]
    stripped = line.lstrip()
    indent = line[: len(line) - len(stripped)]
    sentinel = _SENTINEL.match(stripped)
    if stripped.startswith("!") and not sentinel:
        marker = re.match(r"!+>?", stripped).group(0)
        return _wrap_comment(indent + marker + " ", stripped[len(marker):])
    head = indent + (sentinel.group(0) + " " if sentinel else "")
    body = stripped[sentinel.end():].lstrip() if sentinel else stripped
    at = _comment_start(body)
    if at < len(body):
        note = body[at + 1:].strip()
        notes = _wrap_comment(indent + "! ", note) if note else []
        return notes + wrap(head + body[:at].rstrip())
    lead = indent + (sentinel.group(0) + "& " if sentinel else "    & ")
    hard = indent + (sentinel.group(0) + "&" if sentinel else "&")
    mask = _literal_mask(body)
    out, prefix, pos = [], head, 0
    while len(prefix) + len(body) - pos > MAX_LINE:
        room = MAX_LINE - len(prefix) - 2
        cut = next((i for i in range(pos + room, pos, -1) if body[i] == " " and not mask[i]
                    and body[pos:i].strip()), -1)
        if cut > 0:
            out.append(prefix + body[pos:cut].rstrip() + " &")
            pos, prefix = cut + 1, lead
            while pos < len(body) and body[pos] == " ":
                pos += 1
        else:
            take = MAX_LINE - len(prefix) - 1
            out.append(prefix + body[pos:pos + take] + "&")
            pos, prefix = pos + take, hard
    out.append(prefix + body[pos:])
    return out
