"""Tables of a report in three forms: CSV (full precision), GitHub markdown and LaTeX
(booktabs), and the escaping every piece of run text goes through before it reaches
report.md, a table or the terminal (run files are data written by anyone: a name must not
open a code span, a link or a terminal escape)."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["code_span", "latex_escape", "md_escape", "plain_text", "to_latex", "to_markdown", "write_table"]


def _format_cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA:
        return ""
    if isinstance(value, (float, np.floating)):
        return f"{value:.3f}"
    return str(value)


def to_markdown(frame: pd.DataFrame) -> str:
    """A GitHub pipe table (floats with 3 decimals; no tabulate needed); every cell, header
    included, goes through ``md_escape``."""
    def cell(v: Any) -> str:
        return md_escape(_format_cell(v))

    header = "| " + " | ".join(cell(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---:" if pd.api.types.is_numeric_dtype(frame[c]) else "---"
                          for c in frame.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |"
            for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows]) + "\n"


# --------------------------------------------------------------------------- escaping
# Text from run files (errors, names, paths, descriptions) reaches report.md, the .md and .tex
# tables and the terminal only through plain_text, md_escape, _code and latex_escape.


def plain_text(value: Any) -> str:
    """``value`` on one line: runs of whitespace (newlines, tabs, Unicode separators) become
    one space and other control or format characters (ANSI escapes, bidi overrides) show as
    ``\\x1b``-style escapes, so run text cannot break a line, a table row or a terminal."""
    text = " ".join(str(value).split())
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


#: What ``md_escape`` backslash-escapes: characters that open code, emphasis, strikethrough,
#: HTML, entities, math or a heading, or end a table cell, wherever they stand; ``_`` unless
#: between two letters or digits (there it cannot emphasise, so names keep their look); ``]``
#: before ``(`` or ``[`` (what makes a link or an image).
_MD_SPECIAL = re.compile(r"[\\`*<|~&$#]|(?<![^\W_])_|_(?![^\W_])|\](?=[(\[])")


def md_escape(value: Any) -> str:
    """``value`` as literal Markdown on one line: run text renders as itself, never as markup,
    in report.md and the .md tables."""
    return _MD_SPECIAL.sub(lambda match: "\\" + match.group(0), plain_text(value))


def code_span(value: Any) -> str:
    """``value`` as a Markdown code span that backticks inside it cannot close."""
    text = plain_text(value)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


_LATEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
          "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
          "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}",
          # braced: a cell starting with "[" would be the optional argument of \\ or \midrule
          "[": "{[}", "]": "{]}"}


def _ascii(text: str) -> str:
    """pdflatex without extra packages typesets ASCII: accents are dropped (é -> e), any other
    character becomes '?'."""
    if text.isascii():
        return text
    folded = (ch if ch.isascii() else
              unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode() for ch in text)
    return "".join(part or "?" for part in folded)


def latex_escape(value: Any) -> str:
    """``value`` as literal LaTeX that compiles in a tabular cell (one line, ASCII, every
    special character escaped; ``->`` as an arrow)."""
    parts = _ascii(plain_text(value)).split("->")
    return r"$\rightarrow$".join("".join(_LATEX.get(ch, ch) for ch in part) for part in parts)


def to_latex(frame: pd.DataFrame, caption: str | None = None) -> str:
    """A booktabs ``tabular`` (needs ``\\usepackage{booktabs}``)."""
    align = "".join("r" if pd.api.types.is_numeric_dtype(frame[c]) else "l" for c in frame.columns)
    lines = ["% written by plume-report; needs \\usepackage{booktabs}"]
    if caption:
        lines.append(f"% {caption}")
    lines += [f"\\begin{{tabular}}{{{align}}}", r"\toprule",
              " & ".join(latex_escape(str(c)) for c in frame.columns) + r" \\", r"\midrule"]
    lines += [" & ".join(latex_escape(_format_cell(v)) for v in row) + r" \\"
              for row in frame.itertuples(index=False)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def write_table(frame: pd.DataFrame, stem: str | Path,
                display: pd.DataFrame | None = None) -> list[Path]:
    """``stem``.csv (raw numbers, full precision), ``stem``.md and ``stem``.tex (``display``,
    the readable form, when given)."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    shown = frame if display is None else display
    paths = [stem.with_suffix(".csv"), stem.with_suffix(".md"), stem.with_suffix(".tex")]
    frame.to_csv(paths[0], index=False, lineterminator="\n")
    paths[1].write_text(to_markdown(shown))
    paths[2].write_text(to_latex(shown, caption=stem.name))
    return paths


# --------------------------------------------------------------------------- report.md
