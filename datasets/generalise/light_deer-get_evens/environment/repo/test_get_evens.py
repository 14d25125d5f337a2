from light_deer.core import get_evens


def test_get_evens():
    assert get_evens([1, 2, 3, 4]) == [2, 4]
