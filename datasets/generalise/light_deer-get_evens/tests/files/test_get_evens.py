from light_deer.core import get_evens


def test_get_evens():
    assert get_evens([1, 2, 3, 4]) == [2, 4]


def test_get_evens_hidden():
    assert get_evens([]) == []
    assert get_evens([5, 7]) == []
    assert get_evens([0, 6, 9]) == [0, 6]
