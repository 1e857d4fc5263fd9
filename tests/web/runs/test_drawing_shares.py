"""An address's share of the uploads' drawings (drawings.py `_address_share`): the people it
stands for, never every slot while there are several, and every slot where a class's teacher
said the room shares the address (the classroom's `people_at` counts its members there); and
after two layouts graphviz gave up on, only a drawing under half the smallest is started."""

from __future__ import annotations

import pytest

from app.web.runs.drawings import ADDRESS_REQUESTS_AT_MOST, Drawings
from app.web.runs.run_book import TooMany
from app.web.settings import Settings


def test_one_address_leaves_a_slot_to_other_places():
    drawings = Drawings(Settings(max_drawings=4, per_address_people=2))
    assert drawings._address_share("10.0.0.7")[0] == 2  # its two people
    drawings = Drawings(Settings(max_drawings=2, per_address_people=4))
    assert drawings._address_share("10.0.0.7")[0] == 1  # not both slots
    drawings = Drawings(Settings(max_drawings=1, per_address_people=4))
    assert drawings._address_share("10.0.0.7")[0] == 1  # the one there is


def test_a_room_that_shares_one_address_may_use_every_slot():
    drawings = Drawings(Settings(max_drawings=2, per_address_people=4))
    drawings.people_at = lambda address: 30 if address == "203.0.113.5" else 4
    assert drawings._address_share("203.0.113.5") == (2, ADDRESS_REQUESTS_AT_MOST)
    assert drawings._address_share("10.0.0.7")[0] == 1


def test_after_two_give_ups_only_a_much_smaller_drawing_is_started():
    drawings = Drawings(Settings(drawing_timeout=5))
    key = ("run", "abc")
    drawings._check_give_ups(key, 10_000)  # nothing given up on yet: any size
    drawings._give_ups.put(key, (1, 400))
    drawings._check_give_ups(key, 10_000)  # one give-up: another grouping may be tried
    drawings._give_ups.put(key, (2, 400))
    drawings._check_give_ups(key, 200)  # half the smallest given up on: drawn
    with pytest.raises(TooMany, match="too big for graphviz"):
        drawings._check_give_ups(key, 201)
