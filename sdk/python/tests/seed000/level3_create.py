sb = lbb.sandboxes.create({"expires_in_seconds": 600})
sb.files.write("data.csv", csv)
sb.stop()     # the disk stays
sb.resume()
sb.delete()
