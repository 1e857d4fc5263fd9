"""Names that look like other names, by Unicode's own rules (UTS #39, Unicode Security
Mechanisms), through ICU's SpoofChecker (PyICU): the teacher reads a member's name off a list,
so "Αna" (Greek Alpha) next to "Ana", or "Τeacher" (Greek Tau), must not pass as them.

- `lookalike_key`: the name's confusable skeleton (UTS #39 section 4, from Unicode's
  confusables.txt as ICU ships it), made case-blind: two names with one key look alike.
- `mixes_scripts`: the name is looser than UTS #39's "Highly Restrictive" level (ICU's
  default): letters of one script, or Latin with Han, kana or Hangul as Chinese, Japanese and
  Korean are written; never Latin with Cyrillic or Greek, the usual disguise. Digits of two
  numbering systems ("1" and Arabic-Indic "١") are refused too.

No table of lookalikes is written here: Unicode revises confusables.txt with each version, and
ICU carries it.
"""

from __future__ import annotations

import icu

__all__ = ["invisible", "lookalike_key", "mixes_scripts"]

# ICU documents check and getSkeleton as safe to call from several threads at once on one
# configured checker; the classroom changes state from request threads
_CHECKER = icu.SpoofChecker()
_CHECKER.setRestrictionLevel(icu.URestrictionLevel.HIGHLY_RESTRICTIVE)
_CHECKER.setChecks(icu.USpoofChecks.RESTRICTION_LEVEL | icu.USpoofChecks.MIXED_NUMBERS)


def lookalike_key(name: str) -> str:
    """The UTS #39 skeleton of `name`, case-blind and blind to spaces. The skeleton keeps case
    ("T" and "t" are not confusable), but a teacher reads "TEACHER" as "teacher", so the
    skeleton is folded and skeletonised again (the fold can give letters that are not skeleton
    prototypes); and a list does not show "Ana Lee" and "AnaLee" apart at a glance."""
    folded = _CHECKER.getSkeleton(0, _CHECKER.getSkeleton(0, name).casefold())
    return "".join(folded.split())


def invisible(ch: str) -> bool:
    """Is `ch` drawn as nothing (Unicode's Default_Ignorable_Code_Point: zero-width characters,
    and letters such as the Hangul fillers U+3164 and U+FFA0, which are not format characters
    but draw blank)?"""
    return bool(icu.Char.hasBinaryProperty(ch, icu.UProperty.DEFAULT_IGNORABLE_CODE_POINT))


def mixes_scripts(name: str) -> bool:
    """Whether `name` mixes scripts past "Highly Restrictive", or numbering systems."""
    return _CHECKER.check(name) != 0
