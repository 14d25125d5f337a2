def reverse_string_value(size):
    return size[::1]
