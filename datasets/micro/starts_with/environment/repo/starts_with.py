def starts_with(s, p):
    return s[:len(p) - 1] == p
