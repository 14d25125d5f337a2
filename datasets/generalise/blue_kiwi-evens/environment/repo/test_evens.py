from blue_kiwi.misc import evens


def test_evens():
    assert evens([1, 2, 3, 4]) == [2, 4]
