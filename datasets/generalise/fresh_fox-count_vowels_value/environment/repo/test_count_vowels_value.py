from fresh_fox.misc import count_vowels_value


def test_count_vowels_value():
    assert count_vowels_value('hello') == 2
    assert count_vowels_value('xyz') == 0
