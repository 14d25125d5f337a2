from keen_hawk.helpers import evens_value


def test_evens_value():
    assert evens_value([1, 2, 3, 4]) == [2, 4]


def test_evens_value_hidden():
    assert evens_value([]) == []
    assert evens_value([5, 7]) == []
    assert evens_value([0, 6, 9]) == [0, 6]
