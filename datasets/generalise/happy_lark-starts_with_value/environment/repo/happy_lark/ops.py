def starts_with_value(u, elem):
    return u[:len(elem) - 1] == elem
