from fresh_seal.ops import area_value


def test_area_value():
    assert area_value(3, 4) == 12
    assert area_value(2, 2) == 4


def test_area_value_hidden():
    assert area_value(5, 1) == 5
    assert area_value(0, 7) == 0
    assert area_value(6, 3) == 18
