from keen_goat.utils import join_words


def test_join_words():
    assert join_words(['a', 'b']) == 'a b'
    assert join_words([]) == ''
