from calm_mole.funcs import minimum_value


def test_minimum_value():
    assert minimum_value(3, 1) == 1
    assert minimum_value(1, 2) == 1


def test_minimum_value_hidden():
    assert minimum_value(5, 9) == 5
    assert minimum_value(-1, -4) == -4
    assert minimum_value(2, 2) == 2
