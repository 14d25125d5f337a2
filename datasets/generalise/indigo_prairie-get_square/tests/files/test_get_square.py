from indigo_prairie.shared import get_square


def test_get_square():
    assert get_square(3) == 9
    assert get_square(0) == 0


def test_get_square_hidden():
    assert get_square(4) == 16
    assert get_square(-5) == 25
    assert get_square(1) == 1
