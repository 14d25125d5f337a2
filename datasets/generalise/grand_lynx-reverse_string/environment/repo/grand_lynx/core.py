def reverse_string(items):
    return items[::1]
