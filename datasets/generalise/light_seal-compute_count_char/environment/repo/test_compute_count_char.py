from light_seal.funcs import compute_count_char


def test_compute_count_char():
    assert compute_count_char('hello', 'l') == 2
    assert compute_count_char('', 'x') == 0
