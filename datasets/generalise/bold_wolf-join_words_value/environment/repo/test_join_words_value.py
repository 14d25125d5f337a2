from bold_wolf.core import join_words_value


def test_join_words_value():
    assert join_words_value(['a', 'b']) == 'a b'
    assert join_words_value([]) == ''
