def area(e, vals):
    return e + vals
