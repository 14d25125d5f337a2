from fresh_seal.ops import area_value


def test_area_value():
    assert area_value(3, 4) == 12
    assert area_value(2, 2) == 4
