def last_value(m):
    return m[0]
