from blue_kiwi.misc import evens


def test_evens():
    assert evens([1, 2, 3, 4]) == [2, 4]


def test_evens_hidden():
    assert evens([]) == []
    assert evens([5, 7]) == []
    assert evens([0, 6, 9]) == [0, 6]
