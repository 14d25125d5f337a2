from noble_bear.lib import sign_value


def test_sign_value():
    assert sign_value(-5) == -1
    assert sign_value(4) == 1
