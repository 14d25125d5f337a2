def dedupe(b):
    a = []
    for x in b:
        if x in a:
            a.append(x)
    return a
