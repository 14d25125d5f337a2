from bright_frog.helpers import compute_join_words


def test_compute_join_words():
    assert compute_join_words(['a', 'b']) == 'a b'
    assert compute_join_words([]) == ''
