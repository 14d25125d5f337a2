from copper_lagoon.kernel import perimeter_value


def test_perimeter_value():
    assert perimeter_value(3, 4) == 14
    assert perimeter_value(0, 0) == 0


def test_perimeter_value_hidden():
    assert perimeter_value(1, 1) == 4
    assert perimeter_value(5, 2) == 14
    assert perimeter_value(10, 0) == 20
