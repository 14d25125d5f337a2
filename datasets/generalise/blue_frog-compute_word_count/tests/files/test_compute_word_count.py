from blue_frog.misc import compute_word_count


def test_compute_word_count():
    assert compute_word_count('a bc d') == 3
    assert compute_word_count('') == 0


def test_compute_word_count_hidden():
    assert compute_word_count('hello') == 1
    assert compute_word_count('x y') == 2
    assert compute_word_count('one two three four') == 4
