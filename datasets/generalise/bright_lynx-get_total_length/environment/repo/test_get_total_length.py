from bright_lynx.funcs import get_total_length


def test_get_total_length():
    assert get_total_length(['ab', 'cde']) == 5
    assert get_total_length([]) == 0
