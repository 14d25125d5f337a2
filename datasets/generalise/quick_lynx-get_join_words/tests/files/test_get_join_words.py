from quick_lynx.ops import get_join_words


def test_get_join_words():
    assert get_join_words(['a', 'b']) == 'a b'
    assert get_join_words([]) == ''


def test_get_join_words_hidden():
    assert get_join_words(['hi']) == 'hi'
    assert get_join_words(['x', 'y', 'z']) == 'x y z'
    assert get_join_words(['ab', 'cd']) == 'ab cd'
