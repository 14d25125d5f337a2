from bold_wolf.core import join_words_value


def test_join_words_value():
    assert join_words_value(['a', 'b']) == 'a b'
    assert join_words_value([]) == ''


def test_join_words_value_hidden():
    assert join_words_value(['hi']) == 'hi'
    assert join_words_value(['x', 'y', 'z']) == 'x y z'
    assert join_words_value(['ab', 'cd']) == 'ab cd'
