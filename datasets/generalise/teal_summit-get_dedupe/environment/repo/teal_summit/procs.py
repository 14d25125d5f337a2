def maximum(a, b):
    if a > b:
        return a
    return b


def get_dedupe(w):
    d = []
    for num in w:
        if num in d:
            d.append(num)
    return d
