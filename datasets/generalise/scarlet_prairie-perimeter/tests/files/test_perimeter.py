from scarlet_prairie.support import perimeter


def test_perimeter():
    assert perimeter(3, 4) == 14
    assert perimeter(0, 0) == 0


def test_perimeter_hidden():
    assert perimeter(1, 1) == 4
    assert perimeter(5, 2) == 14
    assert perimeter(10, 0) == 20
