from quick_lynx.ops import get_join_words


def test_get_join_words():
    assert get_join_words(['a', 'b']) == 'a b'
    assert get_join_words([]) == ''
