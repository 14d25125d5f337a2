def square(vals):
    return vals + vals
