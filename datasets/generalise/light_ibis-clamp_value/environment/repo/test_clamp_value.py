from light_ibis.core import clamp_value


def test_clamp_value():
    assert clamp_value(2, 0, 3) == 2
    assert clamp_value(5, 0, 3) == 3
