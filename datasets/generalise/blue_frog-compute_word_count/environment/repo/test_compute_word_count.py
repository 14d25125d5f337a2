from blue_frog.misc import compute_word_count


def test_compute_word_count():
    assert compute_word_count('a bc d') == 3
    assert compute_word_count('') == 0
