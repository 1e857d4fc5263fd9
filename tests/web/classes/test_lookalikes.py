"""Names that look alike, by Unicode's own data (UTS #39 and confusables.txt, through ICU):
the pairs below are confusables.txt's entries (U+0430 CYRILLIC SMALL LETTER A -> a, "m" ->
"rn", U+03BF GREEK SMALL LETTER OMICRON -> o, U+0391 GREEK CAPITAL LETTER ALPHA -> A, U+03A4
GREEK CAPITAL LETTER TAU -> T, "0" -> "O", "1" -> "l"), and the scripts are Scripts.txt's.
Then the rules of a class built on them: a member's name that only looks like another member's,
the teacher's or an alias is refused; the same name typed again still gets its number."""

from __future__ import annotations

import pytest

from app.web.classes.lookalikes import lookalike_key, mixes_scripts
from app.web.classes.state import ClassError, ClassState, display_name


@pytest.mark.parametrize("one, other", [
    ("paypal", "p\u0430ypal"),  # Cyrillic а
    ("m", "rn"),
    ("Kim", "Kirn"),
    ("code", "c\u03bfde"),  # Greek omicron
    ("Ana", "\u0391na"),  # Greek Alpha
    ("teacher", "\u03a4eacher"),  # Greek Tau, and a capital: the key is case-blind
    ("the teacher", "the t\u0435acher"),  # Cyrillic е
    ("Bob", "B0b"),
    ("Bill", "Bi11"),
    ("ANA", "\u0391\u039d\u0391"),  # all Greek capitals: one script, still a lookalike
])
def test_confusables_share_a_key(one, other):
    assert one != other and lookalike_key(one) == lookalike_key(other)


@pytest.mark.parametrize("one, other", [
    ("Ana", "Anna"),
    ("Ana", "Ana (2)"),
    ("Ana", "\u0410\u043d\u0430"),  # Cyrillic "Ана": н looks like H, not n
    ("Kim", "Tim"),
    ("Li", "\u674e"),
])
def test_different_names_have_different_keys(one, other):
    assert lookalike_key(one) != lookalike_key(other)


@pytest.mark.parametrize("name", [
    "p\u0430ypal", "\u03a4eacher", "the t\u0435acher", "\u0391na", "Ivan \u0418\u0432\u0430\u043d",
    "Ali \u0639\u0644\u064a",  # Latin with Arabic: past "Highly Restrictive"
    "x1\u0661",  # digits of two numbering systems
])
def test_mixed_scripts_are_found(name):
    assert mixes_scripts(name)


@pytest.mark.parametrize("name", [
    "Ana", "Jos\u00e9 Garc\u00eda", "\u674e\u5c0f\u9f99",
    "\u03a3\u03c9\u03ba\u03c1\u03ac\u03c4\u03b7\u03c2",  # Greek
    "\u0645\u062d\u0645\u062f", "Nguy\u1ec5n V\u0103n An", "O'Brien", "Anne-Marie",
    "\u092a\u094d\u0930\u093f\u092f\u093e",  # Devanagari
    "\u5c71\u7530 \u306f\u306a\u3053",  # Japanese: Han with Hiragana
    "\uae40\ubbfc\uc900", "Ana (2)", "Bob 42", "Li \u674e", "Ana \U0001F642",
    "\u0418\u0432\u0430\u043d", "\u0396\u03c9\u03ae 2", "S\u00f8ren",
])
def test_names_in_one_script_are_not_mixed(name):
    assert not mixes_scripts(name)
    assert display_name(name) == name


@pytest.mark.parametrize("name", ["p\u0430ypal", "\u03a4eacher", "\u0391na"])
def test_a_mixed_name_is_refused_with_what_to_do(name):
    with pytest.raises(ClassError) as refused:
        display_name(name)
    assert refused.value.status == 422 and "one alphabet" in str(refused.value.detail)


@pytest.mark.parametrize("name", [
    "Teacher", "THE TEACHER", "the  teacher", "student-0a1b2c", "STUDENT-",
    "Student-Bob", "student-Oalb",  # 0 -> O, 1 -> l: an alias, read off the projector
    "the\u3164teacher", "the\uffa0teacher",  # Hangul fillers: letters that draw blank
    "theteacher",  # a list does not show a missing space
])
def test_the_teachers_names_and_aliases_are_refused_also_as_lookalikes(name):
    with pytest.raises(ClassError) as refused:
        display_name(name)
    assert refused.value.status == 422 and "choose your own" in str(refused.value.detail)


def _class(*names: str) -> ClassState:
    state = ClassState(code="ABCDEF", teacher="cookie:teacher")
    for n, name in enumerate(names):
        state.admit(f"cookie:s{n}", f"10.0.0.{n}")
        state.rename(f"cookie:s{n}", name)
    return state


@pytest.mark.parametrize("taken, lookalike", [
    ("Kim", "Kirn"),
    ("Bob", "B0b"),
    ("ANA", "\u0391\u039d\u0391"),  # Greek capitals, one script: only the skeleton tells
    ("\u0391\u039d\u0391", "ANA"),  # and the other way round
    ("Ana Lee", "Ana\u3164Lee"),  # the attacker's read: a Hangul filler for the space
    ("Ana Lee", "AnaLee"),
])
def test_a_name_that_only_looks_like_a_members_is_refused(taken, lookalike):
    state = _class(taken)
    state.admit("cookie:new", "10.0.1.1")
    with pytest.raises(ClassError) as refused:
        state.rename("cookie:new", lookalike)
    assert refused.value.status == 409 and refused.value.code == "name_looks_taken"
    assert "choose another name" in str(refused.value.detail)
    assert state.members["cookie:new"].name is None
    # another name goes through, and the same name typed again still gets its number
    assert state.rename("cookie:new", taken) == f"{taken} (2)"


def test_a_numbered_name_skips_numbers_that_look_taken():
    """"Kim (2)" exists as "Kirn (2)"'s lookalike would: the number skips past it."""
    state = _class("Kim", "Kirn (2)")
    state.admit("cookie:new", "10.0.1.1")
    assert state.rename("cookie:new", "Kim") == "Kim (3)"


def test_keeping_ones_own_name_or_a_lookalike_of_it_is_no_clash():
    state = _class("Kim")
    assert state.rename("cookie:s0", "Kim") == "Kim"
    assert state.rename("cookie:s0", "Kirn") == "Kirn"  # only others' names count


def test_letters_that_draw_blank_are_dropped_from_a_name():
    """Default_Ignorable_Code_Point, by ICU's own data: the Hangul fillers are letters (Lo),
    not format characters, so the category rule alone kept them."""
    import unicodedata

    assert unicodedata.category("\u3164") == "Lo"
    assert display_name("A\u3164na") == "Ana" and display_name("B\u115fob\u1160") == "Bob"
    assert display_name("Jos\u00e9 Garc\u00eda") == "Jos\u00e9 Garc\u00eda"  # letters stay
    assert display_name("\uae40\ubbfc\uc900") == "\uae40\ubbfc\uc900"  # and Hangul itself
