from calm_mole.funcs import minimum_value


def test_minimum_value():
    assert minimum_value(3, 1) == 1
    assert minimum_value(1, 2) == 1
