from olive_meadow.procs import double_all


def test_double_all():
    assert double_all([1, 3]) == [2, 6]
    assert double_all([]) == []
