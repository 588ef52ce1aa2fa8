// The seed's todo API as a user would otherwise run it: Express + Mongoose, written the way
// their guides show (a Mongoose model with validators and a toJSON transform, async routes,
// hydrated documents). A baseline for bench/todos_bench.py, not part of the service.
//
//   MONGODB_URI=mongodb://127.0.0.1:27017/todos_peer PORT=8100 node server.js
//
// It answers the same envelope, status codes and five-key todos as the service. Where the
// seed says nothing, it does the cheap thing: the list comes in natural order (no sort),
// and only the unique index on title is made. It prints "listening on <port>" when ready.

"use strict";

const express = require("express");
const mongoose = require("mongoose");

const VERSION = require("./package.json").version;
const PORT = Number(process.env.PORT || 8100);
const URI = process.env.MONGODB_URI || "mongodb://127.0.0.1:27017/todos_peer";

const todoSchema = new mongoose.Schema(
  {
    title: { type: String, required: true, minlength: 1, maxlength: 40, unique: true },
    description: { type: String, maxlength: 1000, default: null },
    createdAt: { type: Date, required: true },
    updatedAt: { type: Date, default: null },
  },
  {
    toJSON: {
      transform(_doc, ret) {
        return {
          id: ret._id.toString(),
          title: ret.title,
          description: ret.description,
          createdAt: ret.createdAt,
          updatedAt: ret.updatedAt,
        };
      },
    },
  },
);
const Todo = mongoose.model("Todo", todoSchema);

const ok = (res, status, data) => res.status(status).json({ data, error: null });
const fail = (res, status, error) => res.status(status).json({ data: null, error });

function failure(res, err) {
  if (err && err.code === 11000) {
    return fail(res, 409, { message: "title must be unique" });
  }
  if (err instanceof mongoose.Error.ValidationError) {
    const details = Object.values(err.errors).map((e) => ({ field: e.path, message: e.message }));
    return fail(res, 400, { message: err.message, details });
  }
  if (err instanceof mongoose.Error.CastError) {
    return fail(res, 404, { message: "Todo not found" });
  }
  return fail(res, 500, { message: "Internal server error" });
}

const route = (handler) => (req, res) => handler(req, res).catch((err) => failure(res, err));
const todoFields = (body) => ({
  title: body && body.todo ? body.todo.title : undefined,
  description: body && body.todo ? (body.todo.description ?? null) : undefined,
});

const app = express();
app.disable("etag");
app.disable("x-powered-by");
app.use(express.json({ limit: "16mb" }));
app.use((_req, res, next) => {
  res.set("X-App-Version", VERSION);
  next();
});

app.get("/", (_req, res) => ok(res, 200, { version: VERSION }));

app.post(
  "/todo",
  route(async (req, res) => {
    const todo = await Todo.create({ ...todoFields(req.body), createdAt: new Date() });
    ok(res, 201, todo);
  }),
);

app.all(["/todo", "/todo/"], (_req, res) => fail(res, 400, { message: "id is required" }));

app.get(
  "/todo/:id",
  route(async (req, res) => {
    const todo = await Todo.findById(req.params.id);
    return todo ? ok(res, 200, todo) : fail(res, 404, { message: "Todo not found" });
  }),
);

app.put(
  "/todo/:id",
  route(async (req, res) => {
    const todo = await Todo.findByIdAndUpdate(
      req.params.id,
      { ...todoFields(req.body), updatedAt: new Date() },
      { new: true, runValidators: true },
    );
    return todo ? ok(res, 202, todo) : fail(res, 404, { message: "Todo not found" });
  }),
);

app.delete(
  "/todo/:id",
  route(async (req, res) => {
    const todo = await Todo.findByIdAndDelete(req.params.id);
    return todo ? ok(res, 202, todo) : fail(res, 404, { message: "Todo not found" });
  }),
);

app.get(
  "/todos",
  route(async (_req, res) => ok(res, 200, await Todo.find())),
);

app.patch(
  "/todos",
  route(async (req, res) => {
    const now = new Date();
    const items = (req.body && req.body.todos) || [];
    const todos = await Todo.insertMany(
      items.map((item) => ({ ...todoFields({ todo: item }), createdAt: now })),
    );
    ok(res, 201, todos);
  }),
);

app.delete(
  "/todos",
  route(async (_req, res) => {
    const { deletedCount } = await Todo.deleteMany({});
    ok(res, 202, { deletedCount });
  }),
);

app.use((_req, res) => fail(res, 404, "Not Found"));

async function main() {
  await mongoose.connect(URI);
  await Todo.init(); // the unique index on title, before the first request
  const server = app.listen(PORT, "127.0.0.1", () => console.log(`listening on ${PORT}`));
  const stop = () => server.close(() => mongoose.disconnect().then(() => process.exit(0)));
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
