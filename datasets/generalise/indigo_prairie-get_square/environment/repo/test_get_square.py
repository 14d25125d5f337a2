from indigo_prairie.shared import get_square


def test_get_square():
    assert get_square(3) == 9
    assert get_square(0) == 0
