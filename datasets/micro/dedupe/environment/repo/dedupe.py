def dedupe(xs):
    out = []
    for x in xs:
        if x in out:
            out.append(x)
    return out
