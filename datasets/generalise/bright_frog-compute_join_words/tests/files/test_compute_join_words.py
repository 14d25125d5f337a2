from bright_frog.helpers import compute_join_words


def test_compute_join_words():
    assert compute_join_words(['a', 'b']) == 'a b'
    assert compute_join_words([]) == ''


def test_compute_join_words_hidden():
    assert compute_join_words(['hi']) == 'hi'
    assert compute_join_words(['x', 'y', 'z']) == 'x y z'
    assert compute_join_words(['ab', 'cd']) == 'ab cd'
