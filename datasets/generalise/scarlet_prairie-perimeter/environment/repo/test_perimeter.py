from scarlet_prairie.support import perimeter


def test_perimeter():
    assert perimeter(3, 4) == 14
    assert perimeter(0, 0) == 0
