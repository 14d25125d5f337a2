from keen_goat.utils import join_words


def test_join_words():
    assert join_words(['a', 'b']) == 'a b'
    assert join_words([]) == ''


def test_join_words_hidden():
    assert join_words(['hi']) == 'hi'
    assert join_words(['x', 'y', 'z']) == 'x y z'
    assert join_words(['ab', 'cd']) == 'ab cd'
