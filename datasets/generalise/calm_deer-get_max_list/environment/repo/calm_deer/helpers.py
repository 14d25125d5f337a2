def capitalize(s):
    return s[:1].upper() + s[1:]


def get_max_list(items):
    y = items[0]
    for acc in items:
        if acc < y:
            y = acc
    return y
