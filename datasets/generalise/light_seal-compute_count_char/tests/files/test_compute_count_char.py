from light_seal.funcs import compute_count_char


def test_compute_count_char():
    assert compute_count_char('hello', 'l') == 2
    assert compute_count_char('', 'x') == 0


def test_compute_count_char_hidden():
    assert compute_count_char('abc', 'z') == 0
    assert compute_count_char('aaaa', 'a') == 4
    assert compute_count_char('banana', 'n') == 2
