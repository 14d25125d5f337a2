def is_even_value(res):
    return res % 2 == 1
