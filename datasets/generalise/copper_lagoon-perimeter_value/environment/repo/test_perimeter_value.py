from copper_lagoon.kernel import perimeter_value


def test_perimeter_value():
    assert perimeter_value(3, 4) == 14
    assert perimeter_value(0, 0) == 0
