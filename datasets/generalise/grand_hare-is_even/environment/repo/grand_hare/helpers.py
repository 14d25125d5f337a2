def is_even(count):
    return count % 2 == 1
