from olive_meadow.procs import double_all


def test_double_all():
    assert double_all([1, 3]) == [2, 6]
    assert double_all([]) == []


def test_double_all_hidden():
    assert double_all([5]) == [10]
    assert double_all([0, -1]) == [0, -2]
    assert double_all([4, 2]) == [8, 4]
