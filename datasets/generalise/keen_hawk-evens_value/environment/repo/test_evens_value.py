from keen_hawk.helpers import evens_value


def test_evens_value():
    assert evens_value([1, 2, 3, 4]) == [2, 4]
